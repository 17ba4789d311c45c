/**
 * Replica processes (replica.ts) started by the harness: each prints its port,
 * then its store events, which are timed here on the harness's clock
 * (`performance.now()` of this process).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import type { ReplicaConfig, ReplicaLine } from './config.js'
import { untracedEnv } from '../child-env.js'

const REPLICA_JS = fileURLToPath(new URL('./replica.js', import.meta.url))

/** A store event as the harness received it. */
export interface StoreEvent {
  replica: number
  event: 'degraded' | 'restored' | 'replicas' | 'closed'
  store: 'redis' | 'settle'
  liveReplicas: number
  /** The harness's `performance.now()` when the line arrived. */
  atMs: number
}

export class ReplicaProcess {
  port = 0
  liveReplicas = 0
  /** When it was SIGKILLed by a fault (harness ms), if it was. */
  killedAtMs: number | undefined
  private readonly child: ChildProcess

  constructor (readonly index: number, config: ReplicaConfig, readonly events: StoreEvent[]) {
    // Untraced, though a replica runs build/lib/: lib/ is covered by the tests that load it in-process, and tracing
    // several replicas at once under tap's coverage hook would cost CPU and merge their coverage for nothing.
    this.child = spawn(process.execPath, [REPLICA_JS, JSON.stringify(config)], {
      env: untracedEnv(),
      stdio: ['pipe', 'pipe', process.env.FAULTS_VERBOSE === undefined ? 'ignore' : 'inherit']
    })
  }

  /** Resolves with this once the replica listens; rejects if it exits first or takes over `timeoutMs` (a busy machine starts a process slowly). */
  ready (timeoutMs = 30_000): Promise<this> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error(`replica ${this.index} did not listen within ${timeoutMs} ms`)) }, timeoutMs)
      this.child.once('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`replica ${this.index} exited (${code ?? signal})`)) })
      createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
        const line = parseLine(text)
        if (line?.type === 'listening') {
          this.port = line.port
          clearTimeout(timer)
          resolve(this)
        } else if (line?.type === 'store') {
          if (line.event === 'replicas') this.liveReplicas = line.liveReplicas
          this.events.push({ replica: this.index, event: line.event, store: line.store, liveReplicas: line.liveReplicas, atMs: performance.now() })
        }
      })
    })
  }

  get running (): boolean {
    return isRunning(this.child)
  }

  pause (): void { this.child.kill('SIGSTOP') }
  resume (): void { this.child.kill('SIGCONT') }

  /** SIGKILL, as a crash: no app.close(), reservations and heartbeat left behind. */
  async kill (): Promise<void> {
    this.killedAtMs = performance.now()
    await this.signal('SIGKILL', 5000)
  }

  /** SIGTERM (the app closes), SIGKILL after `graceMs`. */
  async stop (graceMs = 3000): Promise<void> {
    this.resume()
    await stopChild(this.child, graceMs)
  }

  private async signal (signal: NodeJS.Signals, waitMs: number): Promise<void> {
    await signalChild(this.child, signal, waitMs)
  }
}

/** Whether `child` has not exited yet. */
export const isRunning = (child: ChildProcess): boolean => child.exitCode === null && child.signalCode === null

/** Sends `signal` to `child` (if it still runs) and waits for it to exit, at most `waitMs`. */
export async function signalChild (child: ChildProcess, signal: NodeJS.Signals, waitMs: number): Promise<void> {
  if (!isRunning(child)) return
  const exited = new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, waitMs)
    child.once('exit', () => { clearTimeout(timer); resolve() })
  })
  child.kill(signal)
  await exited
}

/** SIGTERM (a server closes), then SIGKILL if it still runs after `graceMs`. */
export async function stopChild (child: ChildProcess, graceMs = 3000): Promise<void> {
  await signalChild(child, 'SIGTERM', graceMs)
  if (isRunning(child)) await signalChild(child, 'SIGKILL', 5000)
}

function parseLine (text: string): ReplicaLine | undefined {
  try {
    return JSON.parse(text) as ReplicaLine
  } catch {
    return undefined
  }
}

/** Starts `count` replicas of `config` at once, numbered from `first`; resolves once all listen. */
export async function startReplicas (config: (index: number) => ReplicaConfig, count: number, events: StoreEvent[], first = 0): Promise<ReplicaProcess[]> {
  const replicas = Array.from({ length: count }, (_, i) => new ReplicaProcess(first + i, config(first + i), events))
  const started = await Promise.allSettled(replicas.map((replica) => replica.ready()))
  const failed = started.find((result) => result.status === 'rejected')
  if (failed !== undefined) {
    await Promise.all(replicas.map((replica) => replica.stop()))
    throw failed.reason
  }
  return replicas
}

/** Waits until every replica's heartbeat counted `count` live replicas (or `timeoutMs` passed); returns whether they did. */
export async function waitForCount (replicas: ReplicaProcess[], count: number, timeoutMs = 8000): Promise<boolean> {
  const deadline = performance.now() + timeoutMs
  while (replicas.some((replica) => replica.liveReplicas !== count)) {
    if (performance.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return true
}
