"""The lookup: the service a caller's lookup goes through (scope, config), the query transform
(L0), the retrieval graph, post-processing, packing and the projection for agents and audit."""
