/**
 * The replica heartbeat: every `heartbeatIntervalMs` this replica announces itself
 * in a sorted set in Redis (scripts/heartbeat.lua; a beat counts for 3 intervals)
 * and reads back how many replicas are live, for the `'local'` fallback's share
 * and the edge modes. It leaves the set on close. A failed beat keeps the last count.
 *
 * A count is trusted as it comes, but for one case: a beat that finds this
 * replica's own last beat gone (Redis lost its data, failed over to a replica
 * that had not got it, or was away longer than a beat counts). The others' beats
 * are gone too then, and come back one by one as each replica reconnects;
 * meanwhile the count is too small and every share too large. So for two beat
 * lifetimes (six intervals) after such a beat, the count never drops below what
 * it was.
 */
import { REPLICAS_KEY } from '../../output/key-format.js'
import { randomUUID } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import type { RedisCalls } from './calls.js'
import type { RedisClientLike, ScriptCall } from './client.js'
import type { OutageLog } from './outage-log.js'
import { parseNumber } from './reply.js'

export interface HeartbeatOptions {
  client: RedisClientLike
  /** The heartbeat script as defined on the client. */
  command: ScriptCall
  calls: RedisCalls
  prefix: string
  /** How often this replica announces itself, in ms; 0 disables. */
  intervalMs: number
  /** Live replicas assumed until the first beat answers. */
  replicas: number
  log: OutageLog
  /** A beat counted the live replicas. */
  counted: () => void
}

/** How many intervals a beat counts for (scripts/heartbeat.lua keeps it so long). */
export const BEAT_LIFETIME_INTERVALS = 3

export class Heartbeat {
  /** Live replicas, from the last beat that answered. */
  liveReplicas: number
  private readonly replicaId = randomUUID()
  private timer: NodeJS.Timeout | undefined
  /** Whether a beat of this replica was ever counted. */
  private counting = false
  /** Until when (ms) the count may not drop: a beat found this replica's own beat lost. */
  private holdUntilMs = -Infinity

  constructor (private readonly options: HeartbeatOptions) {
    this.liveReplicas = options.replicas
  }

  /** Whether it beats at all (`heartbeatIntervalMs` > 0). */
  get enabled (): boolean {
    return this.options.intervalMs > 0
  }

  /** Beats now and every interval (when enabled). */
  start (): void {
    if (this.enabled) {
      void this.count()
      this.timer = setInterval(() => { void this.count() }, this.options.intervalMs)
      this.timer.unref()
    }
  }

  /** Stops beating. */
  stop (): void {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
  }

  /** Leaves the set (on close); resolves once Redis answered or failed. */
  leave (): Promise<unknown> {
    return this.beat('1').catch(() => {})
  }

  /**
   * Announces this replica (`leaving` '0') or its leaving ('1'); resolves with the
   * script's reply, bounded by the wait. A beat's reply is read even when its wait
   * failed: a beat held in the client's offline queue reaches Redis after a restart,
   * and it is the one that finds this replica's last beat gone.
   */
  private beat (leaving: '0' | '1'): Promise<unknown> {
    const { client, command, calls, prefix, intervalMs } = this.options
    const call = command.call(client, prefix + REPLICAS_KEY, this.replicaId, BEAT_LIFETIME_INTERVALS * intervalMs, leaving)
    // A reply that is no list (a corrupting middlebox) is not read here; count() logs it.
    if (leaving === '0') call.then((reply) => { if (Array.isArray(reply) && reply[1] === '1') this.lost() }, () => {})
    return calls.wait(call, calls.nodeOf(REPLICAS_KEY))
  }

  /** Beats, and counts the live replicas (a failure keeps the last count, logged). */
  async count (): Promise<void> {
    await this.beat('0')
      .then((reply) => {
        this.countFrom(Math.max(1, parseNumber((reply as unknown[])[0])))
        this.options.counted()
      })
      .catch((error: unknown) => {
        this.options.log.line('warn', 'heartbeat-failed', { err: error }, 'fastify-tollgate: Redis heartbeat failed; keeping the last replica count')
      })
  }

  /** A beat found this replica's own last beat gone: the count may not drop for two beat lifetimes (if this replica had counted before). */
  private lost (): void {
    if (!this.counting) return
    // Two lifetimes: a replica whose client reconnects with a backoff may beat again late.
    this.holdUntilMs = performance.now() + 2 * BEAT_LIFETIME_INTERVALS * this.options.intervalMs
    this.options.log.line('warn', 'heartbeat-lost', { liveReplicas: this.liveReplicas },
      'fastify-tollgate: this replica\'s last heartbeat is gone from Redis (data lost or a long outage); keeping the replica count until every replica beat again')
  }

  /** Takes `live` as the count, but while a lost beat holds it, not below the last count. */
  private countFrom (live: number): void {
    this.liveReplicas = performance.now() < this.holdUntilMs ? Math.max(live, this.liveReplicas) : live
    this.counting = true
  }
}
