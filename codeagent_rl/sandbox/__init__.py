"""The sandbox: guest forkserver, gVisor and process backends, pool, CLI."""
