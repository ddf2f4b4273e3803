"""The REST endpoints of datasets, documents and jobs (routed with the sources' own:
urls.py), and the serializers the API views of several apps share."""
