"""What worker and dispatcher processes share: supervised loops, fleet membership, process
identity, wake-up hints and one loop per Redis primary."""
