"""Ingestion: documents found on disk (sources), made into chunks (recipe), written by the indexer;
watching folders, freshness, removal, and copying an index between backends."""
