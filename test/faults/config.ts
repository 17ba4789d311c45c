/**
 * What the fault suite shares between the harness and the replica processes:
 * a replica's configuration (passed as JSON in argv) and the suite's defaults.
 */
import type { EdgeMode, FailMode } from '../../lib/index.js'

export interface HostPort { host: string, port: number }

/** A single Redis, or a Sentinel group by its master's name. */
export type RedisTarget = HostPort | { sentinels: HostPort[], name: string }

export interface ReplicaConfig {
  redis: RedisTarget
  edge: { capacity: number, refillPerSecond: number, mode: EdgeMode }
  store: { failMode: FailMode, heartbeatIntervalMs: number, fallbackHeadroom?: number }
  /**
   * A skewed clock: `performance.now()` and `Date.now()` of the replica process
   * read `offsetMs` ahead and run `rate` times as fast (see replica.ts).
   */
  skew?: { offsetMs: number, rate: number }
}

/** The suite's quota: B = 100, R = 20/s, three replicas, h = 0.2, a heartbeat every second. */
export const DEFAULTS = {
  capacity: 100,
  refillPerSecond: 20,
  replicas: 3,
  headroom: 0.2,
  heartbeatIntervalMs: 1000
} as const

/** A line a replica prints on stdout: its port once listening, or a store event. */
export type ReplicaLine =
  | { type: 'listening', port: number }
  | { type: 'store', event: 'degraded' | 'restored' | 'replicas' | 'closed', store: 'redis' | 'settle', liveReplicas: number }
