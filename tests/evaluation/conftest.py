"""The evaluation app's tests measure retrieval on the retrieval tests' worlds: the same
imported runbooks and live server."""

from tests.retrieval.conftest import acme, acme_edge, globex, web  # noqa: F401
