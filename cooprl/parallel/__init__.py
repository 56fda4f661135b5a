"""Floor 2, the other processes: the parallel context a trainer holds (context), the collectives (distributed), the
sharding of models (fsdp) and the pure data order every process agrees on (order)."""
