"""Reports and exports: batch reports, the one CSV writer, plain-data views of stored rows."""
