"""The input store for the ZEP 5 reference generator, made the way its own integration test
makes one (``zarr-accumulation/tests/integration_test.py``: ``np.random.seed(0)``, uniform
values, those below 0.2 set to the sentinel -99, ``latitude``/``longitude``/``time`` 1-D
arrays, ``time`` as ``datetime64[m]`` every 30 minutes from 2000-06-01), smaller, on a grid
spread over the globe, and with some exact zeros (valid values equal to the fill value 0).

Runs under the generator's own stack (Python 3.11, zarr 2.13.3): ``python make_input.py DEST``.
"""

import sys

import numpy as np
import zarr

NLAT, NLON, NTIME = 12, 16, 40
CLAT, CLON, CTIME = 3, 4, 10

path = sys.argv[1]
np.random.seed(0)
data = np.random.rand(NLAT, NLON, NTIME).astype("f4")
zero = (data >= 0.2) & (data < 0.25)
data[data < 0.2] = -99
data[zero] = 0.0
root = zarr.open(path)
root.create_dataset("variable", shape=data.shape, chunks=(CLAT, CLON, CTIME), data=data)
root.create_dataset("latitude", shape=NLAT, chunks=CLAT, data=np.arange(-82.5, 90, 15.0))
root.create_dataset("longitude", shape=NLON, chunks=CLON, data=np.arange(-168.75, 180, 22.5))
time = np.arange(
    np.datetime64("2000-06-01"), np.datetime64("2000-12-26"), np.timedelta64(30, "m"),
    dtype="datetime64[m]",
)[:NTIME]  # fmt: skip
root.create_dataset("time", shape=NTIME, chunks=CTIME, data=time)
