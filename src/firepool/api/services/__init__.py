"""What the API does, apart from HTTP: routes parse and answer, services decide."""
