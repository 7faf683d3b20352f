"""Hudi table version 6 on disk: file and instant names, properties, Avro plans and metadata,
log blocks, parquet base files. Codecs only: no table logic, nothing above this layer is imported."""
