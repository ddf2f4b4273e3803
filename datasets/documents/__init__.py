"""Tenants', datasets' and documents' writes and reads, the original files, evidence ids,
the links evidence carries and how current it is."""
