/**
 * The faults: each is injected once its time in the window comes, and resolves
 * when it has ended, with what the bounds need (how long Redis was unreachable,
 * how many replicas were cut off or added, ...).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { Redis } from 'ioredis'
import type { RedisServer } from '../redis-server.js'
import { killAtExit } from './cleanup.js'
import type { Load } from './load.js'
import type { ReplicaProcess } from './processes.js'
import type { TcpProxy } from './proxy.js'
import type { SentinelGroup } from './sentinel.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

export type FaultKind =
  | 'none' | 'sigstop' | 'restart-empty' | 'debug-sleep' | 'proxy-cut' | 'scale-up'
  | 'stop-replica' | 'kill-replica' | 'skew' | 'cpu' | 'sentinel-failover'

/** What a fault acts on. */
export interface FaultContext {
  redis: RedisServer | undefined
  sentinel: SentinelGroup | undefined
  replicas: ReplicaProcess[]
  /** The proxies by replica index (replicas behind one). */
  proxies: Map<number, TcpProxy>
  load: Load
  /** Starts `count` more replicas and puts them under load. */
  addReplicas: (count: number) => Promise<void>
}

export interface FaultOutcome {
  startMs: number
  endMs: number
  /** d: seconds Redis was unreachable (summed over stalls). */
  unreachableS: number
  /** k: replicas cut off from Redis. */
  cut: number
  /** Replicas added (scale-up). */
  added: number
}

/** Seconds each fault lasts, nominally (the window is sized from it). */
export const DURATION_S: Record<FaultKind, number> = {
  'none': 0,
  'sigstop': 2,
  'restart-empty': 1.5,
  'debug-sleep': 5,
  'proxy-cut': 5,
  'scale-up': 3,
  'stop-replica': 5,
  'kill-replica': 0,
  'skew': 0,
  'cpu': 5,
  'sentinel-failover': 3 // the window waits for the failover anyway
}

/** Injects `kind` now; resolves when it ended. */
export async function inject (kind: FaultKind, context: FaultContext): Promise<FaultOutcome> {
  const startMs = performance.now()
  const outcome = { startMs, endMs: startMs, unreachableS: 0, cut: 0, added: 0 }
  const done = (more: Partial<FaultOutcome> = {}): FaultOutcome => ({ ...outcome, endMs: performance.now(), ...more })
  const redis = (): RedisServer => { if (context.redis === undefined) throw new Error(`${kind} needs a redis-server`); return context.redis }
  switch (kind) {
    case 'sigstop':
      redis().pause()
      await sleep(DURATION_S.sigstop * 1000)
      redis().resume()
      return done({ unreachableS: DURATION_S.sigstop })
    case 'restart-empty':
      await redis().restartEmpty(1000)
      return done({ unreachableS: (performance.now() - startMs) / 1000 })
    case 'debug-sleep':
      return done({ unreachableS: await debugSleeps(redis(), 4, 0.3, 1500) })
    case 'proxy-cut':
      return done({ cut: await cutProxies(context.proxies, DURATION_S['proxy-cut']), unreachableS: DURATION_S['proxy-cut'] })
    case 'scale-up':
      await context.addReplicas(context.replicas.length)
      return done({ added: context.replicas.length / 2 })
    case 'stop-replica':
      return done(await stopReplica(context.replicas[1], DURATION_S['stop-replica']))
    case 'kill-replica':
      return done(await killReplica(context.replicas[1], context.load))
    case 'cpu':
      await burnCpu(3, DURATION_S.cpu)
      return done()
    case 'sentinel-failover':
      return done({ unreachableS: await failOver(context.sentinel) })
    default:
      return done()
  }
}

/** `count` stalls of `seconds` (DEBUG SLEEP, sent from another client and not waited for), one every `everyMs`; returns the seconds stalled. */
async function debugSleeps (server: RedisServer, count: number, seconds: number, everyMs: number): Promise<number> {
  const client = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  try {
    for (let i = 0; i < count; i++) {
      if (i > 0) await sleep(everyMs)
      client.call('DEBUG', 'SLEEP', String(seconds)).catch(() => {})
    }
    await sleep(seconds * 1000 + 100)
  } finally {
    client.disconnect()
  }
  return count * seconds
}

async function cutProxies (proxies: Map<number, TcpProxy>, seconds: number): Promise<number> {
  for (const proxy of proxies.values()) proxy.cut()
  await sleep(seconds * 1000)
  for (const proxy of proxies.values()) proxy.mend()
  return proxies.size
}

async function stopReplica (replica: ReplicaProcess | undefined, seconds: number): Promise<Partial<FaultOutcome>> {
  replica?.pause()
  await sleep(seconds * 1000)
  replica?.resume()
  return {}
}

async function killReplica (replica: ReplicaProcess | undefined, load: Load): Promise<Partial<FaultOutcome>> {
  if (replica !== undefined) {
    load.drop(replica)
    await replica.kill()
  }
  return {}
}

/** A busy loop that exits when its parent (the harness) is gone. */
const BURNER = 'const parent = process.ppid; for (;;) { for (let i = 0; i < 1e7; i++); if (process.ppid !== parent) process.exit() }'

/** `count` busy-loop processes beside the replicas for `seconds`. */
async function burnCpu (count: number, seconds: number): Promise<void> {
  const burners: ChildProcess[] = Array.from({ length: count }, () => spawn(process.execPath, ['-e', BURNER], { stdio: 'ignore' }))
  const forget = burners.map((burner) => killAtExit(burner.pid))
  try {
    await sleep(seconds * 1000)
  } finally {
    for (const burner of burners) burner.kill('SIGKILL')
    for (const done of forget) done()
  }
}

/** Kills the Sentinel group's primary and waits for the failover; returns the seconds from the kill to the new primary. */
async function failOver (group: SentinelGroup | undefined): Promise<number> {
  if (group === undefined) throw new Error('sentinel-failover needs a Sentinel group')
  const started = performance.now()
  await group.killPrimary()
  await group.waitForFailover(30_000)
  return (performance.now() - started) / 1000
}
