"""The user-facing text says what things are, not which issue or session made them: no
"issue N" or "session N" in the README, the docs (the changelog excepted), the benchmark
pages and stored summaries, or the comments, docstrings and strings (help texts, report
lines) of the package, the benchmark scripts and the tuned examples."""

import io
import re
import tokenize
from pathlib import Path
from typing import Iterator, List, Tuple

REPO = Path(__file__).resolve().parents[1]
PATTERN = re.compile(r"\b(issue|session)s? #?\d+", re.IGNORECASE)

# Read whole: every line is user-facing text.
TEXT_FILES = ["README.md", "docs/*.md", "benchmarks/README.md", "benchmarks/results/**/*.md",
              "tuned_examples/**/*.md", "cluster/**/*.md"]
# Read for their comments and string literals (docstrings, help texts, messages) only.
PYTHON_FILES = ["hca_rllib/**/*.py", "benchmarks/*.py", "tuned_examples/**/*.py"]
EXCEPTED = {"CHANGELOG.md"}  # the history, by design


def _files(patterns: List[str]) -> List[Path]:
    found = {path for pattern in patterns for path in REPO.glob(pattern) if path.is_file()}
    return sorted(path for path in found if path.name not in EXCEPTED)


def _text_hits(path: Path) -> Iterator[Tuple[int, str]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if PATTERN.search(line):
            yield number, line.strip()


def _python_hits(path: Path) -> Iterator[Tuple[int, str]]:
    """Hits in comments and string tokens (an f-string is one STRING token on Python
    3.11 and FSTRING_MIDDLE pieces from 3.12), at the line where each hit stands."""
    source = path.read_text(encoding="utf-8")
    kinds = {tokenize.COMMENT, tokenize.STRING}
    kinds |= {getattr(tokenize, "FSTRING_MIDDLE")} if hasattr(tokenize, "FSTRING_MIDDLE") else set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in kinds:
            continue
        for offset, line in enumerate(token.string.splitlines()):
            if PATTERN.search(line):
                yield token.start[0] + offset, line.strip()


def _hits() -> List[str]:
    hits = []
    for path in _files(TEXT_FILES):
        hits += [f"{path.relative_to(REPO)}:{n}: {line}" for n, line in _text_hits(path)]
    for path in _files(PYTHON_FILES):
        hits += [f"{path.relative_to(REPO)}:{n}: {line}" for n, line in _python_hits(path)]
    return hits


def test_no_issue_or_session_numbers_in_user_facing_text():
    hits = _hits()
    assert not hits, ("'issue N' / 'session N' in user-facing text; say what the thing is or "
                      "measures instead:\n" + "\n".join(hits))


def test_the_scan_finds_what_it_must(tmp_path):
    """The scanner itself: hits in comments, docstrings, help strings and f-strings, at
    their own line; none in code or in words that only look alike."""
    path = tmp_path / "sample.py"
    path.write_text('"""A module.\n\nFrom issue 12.\n"""\n'
                    "x = 1  # see Session #3\n"
                    "issue_12 = 2\n"
                    "parser_help = 'the default of issues 4'\n"
                    "name = f\"{x} tissue 5\"\n"
                    "msg = f\"{x} per session 7\"\n")
    assert [n for n, _ in _python_hits(path)] == [3, 5, 7, 9]
    page = tmp_path / "page.md"
    page.write_text("# Results\n\nIssue 11's candidate.\nThe sessions column.\nsession 2\n")
    assert [n for n, _ in _text_hits(page)] == [3, 5]
    assert _files(TEXT_FILES) and _files(PYTHON_FILES)
    assert not [p for p in _files(["*.md"]) if p.name == "CHANGELOG.md"]
