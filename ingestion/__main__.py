"""`python -m ingestion ...` and `spark-submit ingestion/__main__.py ...` (bin/lakehouse-ingest):
the same job as `lakehouse ingest ...`."""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
