"""Reading granules into Zarr: conversion of NetCDF4/HDF5 files (``convert``)."""
