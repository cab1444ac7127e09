"""`python -m ingestion ...` and `spark-submit ingestion/__main__.py ...` (`lakehouse submit`):
the same job as `lakehouse ingest ...`."""

import sys

# spark-submit puts the --py-files zip first on the driver's path, and the SparkContext adds
# its copy again when it starts. That zip is for executors' Python workers; the driver runs
# the installed project, which reads its data files (pipeline.yml, schemas) from disk. So the
# zip leaves the path, and the project's top-level packages are imported now, from disk:
# a submodule imported later is looked up in its package's folder, never on sys.path.
sys.path[:] = [entry for entry in sys.path if not entry.endswith("lakehouse-jobs.zip")]

import expectations  # noqa: E402, F401
import ingestion  # noqa: E402, F401
import producers  # noqa: E402, F401
from lakehouse.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
