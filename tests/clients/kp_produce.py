#!/usr/bin/env python3
"""Produce N records with kafka-python (KafkaProducer) and report deliveries.

The same records, flags and output as ck_produce.py (key 'k{i % 16}' with
--keyed, value '{compression}-{i}' padded with '.' to --value-size):

  {"delivered": n, "count": N, "errors": ["..."], "error_count": e,
   "partitions": {"p": count}, "offsets": {"p": [min, max]},
   "values_sha": "...", "elapsed_s": s, "client": "kafka-python 3.0.12"}

-X takes KafkaProducer options (e.g. -X api_version=2.5.0 -X retries=0).
Exit 1 (JSON still printed) when fewer than N were delivered.
"""

import argparse
import time

from _common import emit, parse_kp_options, produced, run, value_for

import kafka
from kafka import KafkaProducer


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    ap.add_argument("--idempotent", action="store_true")
    ap.add_argument("--keyed", action="store_true")
    ap.add_argument("--partition", type=int, default=None)
    ap.add_argument("--value-size", type=int, default=0)
    ap.add_argument("--value-prefix", default=None)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                    help="extra KafkaProducer option (repeatable)")
    a = ap.parse_args()

    acks = {"0": 0, "1": 1, "all": "all", "-1": "all"}[a.acks]
    conf = dict(
        bootstrap_servers=a.bootstrap,
        client_id="kp_produce",
        compression_type=None if a.compression == "none" else a.compression,
        acks=acks,
        linger_ms=a.linger_ms,
        enable_idempotence=a.idempotent,
        delivery_timeout_ms=int(a.timeout * 1000),
        request_timeout_ms=min(30000, int(a.timeout * 1000) - 1),
    )
    conf.update(parse_kp_options(a.extra))
    p = KafkaProducer(**conf)

    prefix = a.value_prefix if a.value_prefix is not None else a.compression
    futures = []
    for i in range(a.start, a.start + a.count):
        v = value_for(prefix, i, a.value_size)
        key = ("k%d" % (i % 16)).encode() if a.keyed else None
        futures.append((v, p.send(a.topic, value=v.encode(), key=key, partition=a.partition)))
    p.flush(timeout=a.timeout)

    delivered, errors = [], []
    for v, f in futures:
        try:
            md = f.get(timeout=max(0.1, t0 + a.timeout + 5 - time.monotonic()))
            delivered.append((md.partition, md.offset, v))
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %s" % (type(e).__name__, e))
    p.close(timeout=5)

    result = produced(t0, a.count, delivered, errors, client="kafka-python %s" % kafka.__version__)
    ok = len(delivered) == a.count
    emit(result, ok, None if ok else "kp_produce: delivered %d of %d (%s)" % (len(delivered), a.count, result["errors"][:3]))


if __name__ == "__main__":
    run(main)
