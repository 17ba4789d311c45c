/**
 * The replica heartbeat: every `heartbeatIntervalMs` this replica announces itself
 * in a sorted set in Redis (scripts/heartbeat.lua; a beat counts for 3 intervals)
 * and reads back how many replicas are live, for the `'local'` fallback's share
 * and the edge modes. It leaves the set on close. A failed beat keeps the last count.
 */
import { REPLICAS_KEY } from '../../output/key-format.js'
import { randomUUID } from 'node:crypto'
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

export class Heartbeat {
  /** Live replicas, from the last beat that answered. */
  liveReplicas: number
  private readonly replicaId = randomUUID()
  private timer: NodeJS.Timeout | undefined

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

  /** Announces this replica (`leaving` '0') or its leaving ('1'); resolves with the live replicas. */
  private beat (leaving: '0' | '1'): Promise<unknown> {
    const { client, command, calls, prefix, intervalMs } = this.options
    const node = calls.nodeOf(REPLICAS_KEY)
    return calls.wait(command.call(client, prefix + REPLICAS_KEY, this.replicaId, 3 * intervalMs, leaving), node)
  }

  /** Beats, and counts the live replicas (a failure keeps the last count, logged). */
  async count (): Promise<void> {
    await this.beat('0')
      .then((count) => {
        this.liveReplicas = Math.max(1, parseNumber(count))
        this.options.counted()
      })
      .catch((error: unknown) => {
        this.options.log.line('warn', 'heartbeat-failed', { err: error }, 'fastify-tollgate: Redis heartbeat failed; keeping the last replica count')
      })
  }
}
