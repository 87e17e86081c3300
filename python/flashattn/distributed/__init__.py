"""flashattn.distributed: attention over one sequence sharded across processes (context parallelism)."""
