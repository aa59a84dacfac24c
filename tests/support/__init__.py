"""Support code for the tests (not tests): fixtures, helpers, ports, processes, web servers."""
