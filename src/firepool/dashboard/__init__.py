"""The broker's web dashboard, served by the API at `/` (see `routes.py`)."""
