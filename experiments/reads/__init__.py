"""The fixed-query reads behind pages, the API and exports: one query plan per page, and they never write."""
