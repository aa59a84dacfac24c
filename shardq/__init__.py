"""shardq: delayed jobs over the partitions of a Redis Cluster."""
