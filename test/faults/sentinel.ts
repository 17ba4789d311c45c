/**
 * The Sentinel group of the 'sentinel-failover' case: test/redis-sentinel.ts's
 * (a primary, a replica and three sentinels, each its own process).
 */
export { startSentinelGroup, type SentinelGroup } from '../redis-sentinel.js'
