"""A tuning-database writer process for the PostgreSQL backend's tests (test_db_postgres_server.py).

    python pg_writer.py URL WRITER BATCHES BATCH_SIZE ACK_FILE

Adds BATCHES transactions of BATCH_SIZE records each (BATCHES 0: until killed); after each ``add``
returns, appends the batch's tag to ACK_FILE and fsyncs it: a tag there is an acknowledged write.
Record messages are ``<tag>-<k>``, so the test can check each batch is stored whole or not at all.
"""

from __future__ import annotations

import itertools
import os
import sys

from alcop_triton.autotune.database import TuningRecord
from alcop_triton.autotune.db_postgres import PostgresDatabase
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.records import KernelConfig, Workload


def main() -> None:
    url, writer, batches, size, ack = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    w = Workload("matmul", (512, 512, 512), "float16", "nn")
    db = PostgresDatabase(url)
    with open(ack, "a", encoding="utf-8") as out:
        for b in (itertools.count() if batches == 0 else range(batches)):
            tag = f"{writer}-b{b}"
            recs = [TuningRecord.from_result(w, MeasureResult(KernelConfig(block_m=64, block_n=64), 0.01 + k * 1e-4,
                                                              None, f"{tag}-{k}"), ("H100", "9.0"))
                    for k in range(size)]
            db.add(recs)
            out.write(tag + "\n")
            out.flush()
            os.fsync(out.fileno())


if __name__ == "__main__":
    main()
