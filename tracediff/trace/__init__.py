"""Trace files: a versioned JSONL schema with a streaming writer and reader."""

from tracediff.trace.reader import Trace, iter_records, read_trace
from tracediff.trace.schema import SCHEMA_VERSION
from tracediff.trace.writer import TraceWriter

__all__ = ["SCHEMA_VERSION", "Trace", "TraceWriter", "iter_records", "read_trace"]
