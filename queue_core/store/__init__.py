"""The store layer: all SQL of pq lives in this package (one module per dialect where it differs)."""
