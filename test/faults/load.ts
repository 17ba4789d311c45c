/**
 * The load driver: keep-alive `node:http` requests to every replica at once,
 * either at a fixed rate per replica (open loop: a request is sent on schedule
 * whether or not the earlier ones were answered) or as `concurrency` loops per
 * replica (closed loop). Every answer is recorded with its replica, its status,
 * and when it was sent and answered (the harness's `performance.now()`).
 */
import { Agent, request } from 'node:http'
import type { ReplicaProcess } from './processes.js'

export interface Sample {
  replica: number
  /** The HTTP status, or 0 when the request failed (connection refused or reset). */
  status: number
  sentMs: number
  receivedMs: number
  /** The `RateLimit-Policy` header, if any. */
  policy: string | undefined
}

export type LoadShape = { ratePerReplica: number } | { concurrency: number }

const TICK_MS = 5

export class Load {
  readonly samples: Sample[] = []
  private readonly agent = new Agent({ keepAlive: true, maxSockets: Infinity })
  private readonly targets = new Set<ReplicaProcess>()
  private readonly inFlight = new Set<Promise<void>>()
  private running = true
  private timer: NodeJS.Timeout | undefined

  constructor (private readonly shape: LoadShape) {}

  /** Starts sending to `replica` (at once, in the shape's rate or loops). */
  add (replica: ReplicaProcess): void {
    this.targets.add(replica)
    if ('concurrency' in this.shape) {
      for (let i = 0; i < this.shape.concurrency; i++) void this.loop(replica)
    } else if (this.timer === undefined) {
      this.schedule(this.shape.ratePerReplica)
    }
  }

  /** Stops sending to `replica` (a replica a fault killed). */
  drop (replica: ReplicaProcess): void {
    this.targets.delete(replica)
  }

  /** Stops sending; waits up to `drainMs` for the answers on their way. */
  async stop (drainMs = 3000): Promise<void> {
    this.running = false
    clearInterval(this.timer)
    await Promise.race([Promise.all(this.inFlight), new Promise((resolve) => setTimeout(resolve, drainMs))])
    this.agent.destroy()
  }

  private schedule (ratePerReplica: number): void {
    const due = new Map<ReplicaProcess, number>()
    this.timer = setInterval(() => {
      const now = performance.now()
      for (const replica of this.targets) {
        let next = due.get(replica) ?? now
        for (; next <= now; next += 1000 / ratePerReplica) void this.send(replica)
        due.set(replica, next)
      }
    }, TICK_MS)
  }

  private async loop (replica: ReplicaProcess): Promise<void> {
    while (this.running && this.targets.has(replica)) await this.send(replica)
  }

  private send (replica: ReplicaProcess): Promise<void> {
    const sentMs = performance.now()
    const sent = new Promise<void>((resolve) => {
      const record = (status: number, policy: string | undefined): void => {
        this.samples.push({ replica: replica.index, status, sentMs, receivedMs: performance.now(), policy })
        resolve()
      }
      const req = request({ host: '127.0.0.1', port: replica.port, path: '/', agent: this.agent }, (res) => {
        res.resume()
        res.on('end', () => { record(res.statusCode ?? 0, res.headers['ratelimit-policy'] as string | undefined) })
        res.on('error', () => { record(0, undefined) })
      })
      req.on('error', () => { record(0, undefined) })
      req.end()
    })
    this.inFlight.add(sent)
    void sent.then(() => this.inFlight.delete(sent))
    return sent
  }
}
