/**
 * A private Redis Sentinel group for the tests: a primary, one replica and three
 * sentinels, each its own redis-server process on a free loopback port with its
 * own temporary folder (test/redis-server.ts). Never touches a server it did not start.
 */
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import { sleep, startOnFreePort, withClient, type RedisServer } from './redis-server.js'

const HOST = '127.0.0.1'

export interface SentinelGroup {
  name: string
  sentinels: Array<{ host: string, port: number }>
  /** The current primary's port (asks a sentinel). */
  primaryPort(): Promise<number>
  /** kill -9 of the current primary. */
  killPrimary(): Promise<void>
  /** Resolves with the new primary's port once the sentinels promoted another and it accepts writes; rejects after timeoutMs. */
  waitForFailover(timeoutMs: number): Promise<number>
  /** Stops every process it started and removes its temp dir. */
  stop(): Promise<void>
}

/** Polls `check` every 50 ms until it returns a value other than `undefined`; throws `what` after `timeoutMs`. */
async function waitFor<T> (what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const value = await check()
      if (value !== undefined) return value
    } catch (error) {
      last = error
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms${last instanceof Error ? ` (last error: ${last.message})` : ''}`)
    await sleep(50)
  }
}

/** A sentinel's reply of field/value pairs (a flat array in RESP2, a map in RESP3) as an object. */
function fields (reply: unknown): Record<string, string> {
  if (reply instanceof Map) return Object.fromEntries([...reply].map(([key, value]) => [String(key), String(value)]))
  if (!Array.isArray(reply)) return {}
  const object: Record<string, string> = {}
  for (let i = 0; i + 1 < reply.length; i += 2) object[String(reply[i])] = String(reply[i + 1])
  return object
}

/** The primary's port, as `sentinel` (a client of a sentinel) knows it. */
async function primaryOf (sentinel: Redis, name: string): Promise<number> {
  const reply = await sentinel.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)
  if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`sentinel: no primary for ${name}`)
  return Number(reply[1])
}

/** Whether the sentinel knows the primary, a healthy replica and the two other sentinels. */
async function sentinelReady (sentinel: Redis, name: string): Promise<boolean> {
  const primary = fields(await sentinel.call('SENTINEL', 'MASTER', name))
  const replicas = await sentinel.call('SENTINEL', 'REPLICAS', name) as unknown[]
  const healthy = replicas.map(fields).some((replica) => replica.flags === 'slave' && replica['master-link-status'] === 'ok')
  return primary.flags === 'master' && Number(primary['num-other-sentinels']) >= 2 && healthy
}

/** Whether the server on `port` is a primary that takes a write (a key outside the store's prefix, expiring in 1 s). */
async function takesWrites (port: number): Promise<boolean> {
  return withClient(port, async (client) => {
    if (!(await client.info('replication')).includes('role:master')) return false
    return await client.set('sentinel-group:write-check', '1', 'PX', 1000) === 'OK'
  })
}

function sentinelConfig (name: string, primaryPort: number, downAfterMs: number, failoverTimeoutMs: number): string {
  return [
    `sentinel monitor ${name} ${HOST} ${primaryPort} 2`,
    `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
    `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
    'sentinel resolve-hostnames no',
    `sentinel announce-ip ${HOST}`,
    ''
  ].join('\n')
}

/** Starts the processes in `servers` (stopped by the caller, also if this throws); resolves once the group is ready. */
async function launch (servers: RedisServer[], name: string, downAfterMs: number, failoverTimeoutMs: number): Promise<{ primary: RedisServer, replica: RedisServer, sentinels: RedisServer[] }> {
  // A primary starts a (diskless) full sync 5 s after a replica asks, by default.
  const noDelay = ['--repl-diskless-sync-delay', '0']
  const primary = await startOnFreePort(() => noDelay)
  servers.push(primary)
  const replica = await startOnFreePort(() => [...noDelay, '--replicaof', HOST, String(primary.port)])
  servers.push(replica)
  await waitFor('the replica did not sync', 10_000, async () =>
    withClient(replica.port, async (client) => (await client.info('replication')).includes('master_link_status:up') || undefined))
  const sentinels: RedisServer[] = []
  for (let i = 0; i < 3; i++) {
    const sentinel = await startOnFreePort(() => ['--sentinel'], sentinelConfig(name, primary.port, downAfterMs, failoverTimeoutMs))
    servers.push(sentinel)
    sentinels.push(sentinel)
  }
  for (const sentinel of sentinels) {
    await waitFor(`sentinel ${sentinel.port} did not see the replica and the other sentinels`, 20_000, async () =>
      withClient(sentinel.port, async (client) => await sentinelReady(client, name) || undefined))
  }
  return { primary, replica, sentinels }
}

/**
 * Starts a Sentinel group: a primary, a replica in sync with it, and three
 * sentinels (quorum 2) that know both and each other. With `t`, stopped when `t` ends.
 */
export async function startSentinelGroup (options: { downAfterMs?: number, failoverTimeoutMs?: number, t?: Test } = {}): Promise<SentinelGroup> {
  const name = 'tollgate'
  const servers: RedisServer[] = []
  const stop = async (): Promise<void> => { await Promise.all(servers.map((server) => server.stop())) }
  options.t?.teardown(stop)
  let started
  try {
    started = await launch(servers, name, options.downAfterMs ?? 1000, options.failoverTimeoutMs ?? 5000)
  } catch (error) {
    await stop()
    throw error
  }
  const { primary, replica, sentinels } = started
  const sentinelPorts = sentinels.map((sentinel) => sentinel.port)
  const primaryPort = async (): Promise<number> => {
    for (const port of sentinelPorts) {
      try { return await withClient(port, (client) => primaryOf(client, name)) } catch { /* the next sentinel */ }
    }
    throw new Error('no sentinel answered')
  }
  let previous = primary.port
  return {
    name,
    sentinels: sentinelPorts.map((port) => ({ host: HOST, port })),
    primaryPort,
    async killPrimary () {
      previous = await primaryPort()
      await [primary, replica].find((server) => server.port === previous)?.kill()
    },
    /** Every sentinel names a primary other than the one killed (or the first, after a SENTINEL FAILOVER), and it takes a write. */
    async waitForFailover (timeoutMs) {
      previous = await waitFor(`no failover from ${previous}`, timeoutMs, async () => {
        const ports = await Promise.all(sentinelPorts.map((port) => withClient(port, (client) => primaryOf(client, name))))
        const port = ports[0] as number
        return port !== previous && ports.every((p) => p === port) && await takesWrites(port) ? port : undefined
      })
      return previous
    },
    stop
  }
}
