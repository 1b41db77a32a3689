"""The sandbox: guest forkserver, gVisor backend, pool, judge and CLI."""
