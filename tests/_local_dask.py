"""An in-process (or two-process) Dask cluster for the tests that compare results on Dask with
those in process: two workers of one thread each; skips the test where Dask is missing."""

from contextlib import contextmanager

import pytest


@contextmanager
def local_dask_client(processes: bool = False):
    """A ``distributed.Client`` on a new two-worker ``LocalCluster`` (threads in this process,
    or ``processes=True``), closed with the cluster on leaving the block."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
