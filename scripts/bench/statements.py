"""Classifies the transactions of one database in a PostgreSQL server log
(log_statement = all, the Debian log_line_prefix '%m [%p] %q%u@%d ') and
prints, per kind, the count in an idle window, in the run window, and per
charge after subtracting the idle window. Used by scripts/bench/statements.

    python3 statements.py <database> <idle.log> <run.log> <charges> [scale]

scale: the run window's length over the idle window's (default 1); the idle
counts are multiplied by it before they are subtracted.
"""

import collections
import re
import sys


def entries(path, db):
    head = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+ \w+ \[(\d+)\] (\S*)@(\S*) (\w+):\s+(.*)$")
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            m = head.match(line)
            if m:
                if cur:
                    yield cur
                cur = [m.group(1), m.group(4), m.group(5)] if m.group(3) == db else None
            elif re.match(r"^\d{4}-\d\d-\d\d ", line):
                if cur:
                    yield cur
                cur = None
            elif cur is not None:
                cur[2] += " " + line.strip()
    if cur:
        yield cur


def kind(sql):
    rules = [
        ("enqueue_charge", "app: cobro.enqueue_charge (attempt, log row, wake-up job)"),
        ("pg_sleep", "driver: pg_sleep between charges"),
        ("WITH acked AS", "cobro wake-up queue: ack + fetch + lock + load (src/wakeq/pg.rs)"),
        ("db_now", "cobro: load the attempt (read-only)"),
        ("UPDATE cobro.payment_attempts SET", "cobro: compare-and-set + log row"),
        ("INSERT INTO cobro.attempt_transitions", "cobro: compare-and-set + log row"),
        ("get_jobs", "apalis: fetch (get_jobs)"),
        ("WITH due AS", "cobro: sweeper"),
        ("WITH stale AS", "heartbeat, orphan re-enqueue"),
        ("apalis.workers", "heartbeat, orphan re-enqueue"),
        ("WITH j AS", "apalis: ack (Done)"),
        ("'Running'", "apalis: lock (Running)"),
        ("pg_type", "sqlx: type lookup"),
    ]
    for needle, name in rules:
        if needle in sql:
            return name
    return "other: " + " ".join(sql.split())[:60]


def transactions(path, db):
    counts = collections.Counter()
    open_tx = {}
    for pid, level, text in entries(path, db):
        if level != "LOG":
            continue
        m = re.match(r"(?:statement|execute [^:]+):\s*(.*)$", text)
        if not m:
            continue
        sql = m.group(1).strip()
        if sql.upper() in ("BEGIN", "START TRANSACTION"):
            open_tx[pid] = set()
        elif sql.upper() in ("COMMIT", "ROLLBACK"):
            kinds = open_tx.pop(pid, set())
            counts[" + ".join(sorted(kinds)) or "(empty)"] += 1
        elif pid in open_tx:
            open_tx[pid].add(kind(sql))
        else:
            counts[kind(sql)] += 1
    return counts


def main():
    db, idle_log, run_log, charges = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    scale = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
    idle, run = transactions(idle_log, db), transactions(run_log, db)
    print("| transaction | idle window | run window | per charge (run - idle x scale) |")
    print("|---|---|---|---|")
    for k in sorted(set(idle) | set(run), key=lambda k: (-run.get(k, 0), k)):
        per = (run.get(k, 0) - idle.get(k, 0) * scale) / charges
        print(f"| {k} | {idle.get(k, 0)} | {run.get(k, 0)} | {per:.2f} |")
    ours = [k for k in set(idle) | set(run) if not k.startswith("driver:")]
    i, r = sum(idle.get(k, 0) for k in ours), sum(run.get(k, 0) for k in ours)
    print(f"| all but the driver's | {i} | {r} | {(r - i * scale) / charges:.2f} |")


if __name__ == "__main__":
    main()
