"""The dispatcher: leases on partitions, promotion of due jobs, trimming, sampling."""

from shardq.dispatcher.dispatcher import Dispatcher, DispatcherStats
from shardq.dispatcher.leases import fair_share

__all__ = ["Dispatcher", "DispatcherStats", "fair_share"]
