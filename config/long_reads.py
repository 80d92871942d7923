"""`python -m config.long_reads SOCKET`: a worker's long-read helper process
(serving/long_reads.py), serving the application the workers serve."""

import os
import sys

from serving import long_reads


def main() -> None:
    long_reads.lower_priority()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config.asgi import application  # Django set up at the helper's lower priority

    long_reads.serve(sys.argv[1], application)


if __name__ == "__main__":
    main()
