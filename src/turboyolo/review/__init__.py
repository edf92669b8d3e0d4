"""``turboyolo review``: a local web app to check and correct labels, model-made ones first.

:mod:`~turboyolo.review.items` is the data side (which images, in which order, their labels read and
saved without losing anything, their provenance); :mod:`~turboyolo.review.images` makes the reduced
images the page shows; :mod:`~turboyolo.review.server` is the HTTP server (one random token, only the
data set's files). The page itself is plain JS/CSS in ``turboyolo/resources/review``.
"""
