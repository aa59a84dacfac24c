"""Example code to copy, shipped in the wheel so the stock image can run it: the handler module
the deployment manifests start their workers with (``handlers``)."""
