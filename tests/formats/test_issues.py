"""label_issues.csv read back: every row in file order, or (``at_least``) only the suspected boxes scored
that high, as the review page asks for them; a file that is not an audit's list is refused naming the row
and what is wrong."""

from __future__ import annotations

import pytest

from turboyolo.errors import FlagError
from turboyolo.formats.issues import LabelIssue, read_issues, write_issues

ROWS = [LabelIssue("/d/a.jpg", "class", 0.9, 0, (1.0, 2.0, 30.0, 40.0), 1, None, 100, 80),
        LabelIssue("/d/a.jpg", "missing", 0.6, 2, (50.0, 5.0, 70.0, 25.0), 2, (50.0, 5.0, 70.0, 25.0), 100,
                   80),
        LabelIssue("/d/b.jpg", "ok", 0.3, 1, (3.0, 3.0, 9.0, 9.0), None, None, 60, 60),
        LabelIssue("/d/b.jpg", "spurious", 0.2, 1, (10.0, 10.0, 20.0, 20.0), None, None, 60, 60)]


def test_all_rows_or_the_suspected_ones_at_a_score(tmp_path):
    path = write_issues(tmp_path / "label_issues.csv", ROWS, ["cat", "dog", "bird"])
    assert read_issues(path) == ROWS
    assert read_issues(tmp_path) == ROWS  # the run directory names its list
    assert read_issues(path, at_least=0.25) == ROWS[:2]  # not the ok row at 0.3, not the row at 0.2
    assert read_issues(path, at_least=0.0) == [ROWS[0], ROWS[1], ROWS[3]]


@pytest.mark.parametrize("at_least", [None, 0.25])
def test_a_bad_score_is_refused_even_in_a_row_left_out(tmp_path, at_least):
    path = write_issues(tmp_path / "label_issues.csv", ROWS, ["cat", "dog", "bird"])
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace(",ok,0.3000,", ",ok,1.5,")  # the ok row: line 4 of the file
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FlagError, match=r"label_issues.csv:4: not a row of an audit's label list \(score"):
        read_issues(path, at_least=at_least)


def test_a_file_without_the_columns_is_refused_even_without_rows(tmp_path):
    path = tmp_path / "label_issues.csv"
    path.write_text("rank,image,kind\n")
    with pytest.raises(FlagError, match="not a `turboyolo audit` label list .no column class"):
        read_issues(path)


def test_a_row_of_another_length_is_refused_and_a_blank_line_is_not(tmp_path):
    path = write_issues(tmp_path / "label_issues.csv", ROWS, ["cat", "dog", "bird"])
    path.write_text(path.read_text() + "\n")
    assert read_issues(path, at_least=0.25) == ROWS[:2]
    path.write_text(path.read_text() + "5,/d/c.jpg,missing,0.7\n")
    with pytest.raises(FlagError, match="label_issues.csv:7: not a row .*4 fields, the header has 18"):
        read_issues(path, at_least=0.25)
