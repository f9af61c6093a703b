"""ErrorLog: `<output>.errors.csv`, the images that failed in the last run."""

from pathlib import Path

from parallel.output.csv_rows import csv_line
from parallel.output.durable import REGULAR_FILE, OutputError, beside, refuse_unless, remove
from parallel.output.record import ERRORS_SUFFIX


class ErrorLog:
    """`<output>.errors.csv`: one row `path,kind,message` per image that failed in this run.

    Rule: failed images are never committed to the output, so every run retries them; the
    errors file of a run therefore lists exactly the images that failed in that run, and
    the file of the last (completing) run is the full list of images missing from the
    output. Opening an ErrorLog removes the file of the previous run; the file is created
    on the first failure (a run without failures leaves none) and flushed after every row,
    so a killed run keeps the failures it met. Same encoding rules as the CSV output
    (UTF-8, undecodable bytes of names written as the original bytes).
    """

    HEADER = ("path", "kind", "message")

    def __init__(self, output):
        self.path = self.path_for(output)
        self.count = 0
        self._file = None
        refuse_unless(self.path, REGULAR_FILE, "move it away or choose another --output")
        try:
            remove(self.path)
        except OSError as error:
            raise OutputError("cannot remove the old %s: %s" % (self.path, error.strerror)) from error

    @staticmethod
    def path_for(output):
        """Path of the errors file of `output` (str or Path)."""
        return beside(Path(output), ERRORS_SUFFIX)

    def add(self, path, kind, message):
        """Records one failed image.

        Args:
          path: str, the image path as given to the writer.
          kind: str, a short category (e.g. "decode", "missing").
          message: str, what went wrong (may hold commas, quotes, newlines).
        """
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", newline="", encoding="utf-8", errors="surrogateescape")
            self._file.write(csv_line(self.HEADER))
        self._file.write(csv_line([str(path), str(kind), str(message)]))
        self._file.flush()
        self.count += 1

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.close()
