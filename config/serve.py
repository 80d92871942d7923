"""`python -m config.serve`: the production server (serving/server.py)."""

from serving.server import main

if __name__ == "__main__":
    main()
