"""``turboyolo audit``: likely label mistakes found from out-of-sample predictions.

:mod:`.job` makes the predictions (folds fine-tuned by the trainer, predicted by the inference wing) and
writes the run directory; :mod:`.scores` turns predictions and labels into a score per box.
"""
