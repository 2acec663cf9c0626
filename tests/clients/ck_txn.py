#!/usr/bin/env python3
"""Transactions with confluent-kafka: alternately committed and aborted.

Runs --transactions transactions of --per records each with
transactional.id --txn-id; transaction t holds values 'txn{t}-{i}' (key
'k{i % 4}') and is committed when t is even, aborted when odd. Prints:

  {"committed": n, "aborted": n, "committed_values": ["txn0-0", ...]}

Exit 1 (JSON still printed) when a transaction call fails.
"""

import argparse

from _common import emit, parse_kv, run

from confluent_kafka import Producer


def main(t0):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--transactions", type=int, default=6)
    ap.add_argument("--per", type=int, default=20)
    ap.add_argument("--txn-id", default="ck-txn")
    ap.add_argument("-X", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()

    conf = {"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id, "linger.ms": 5, "client.id": "ck_txn"}
    conf.update(parse_kv(a.extra))
    p = Producer(conf)
    result = {"committed": 0, "aborted": 0, "committed_values": [], "error": None}
    try:
        p.init_transactions(30)
        for t in range(a.transactions):
            p.begin_transaction()
            values = ["txn%d-%d" % (t, i) for i in range(a.per)]
            for i, v in enumerate(values):
                p.produce(a.topic, key="k%d" % (i % 4), value=v)
            p.flush(30)
            if t % 2 == 0:
                p.commit_transaction(30)
                result["committed"] += len(values)
                result["committed_values"] += values
            else:
                p.abort_transaction(30)
                result["aborted"] += len(values)
    except Exception as e:  # noqa: BLE001
        result["error"] = str(e)
    emit(result, result["error"] is None, result["error"])


if __name__ == "__main__":
    run(main)
