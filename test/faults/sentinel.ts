/**
 * The Sentinel group of the 'sentinel-failover' case, from test/redis-sentinel.ts
 * (written beside this suite). It is loaded at run time, by a path the compiler
 * does not follow, so this suite builds whether that file exists or not; without
 * it, `loadSentinel()` resolves with undefined and the case is left out.
 */
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type { HostPort } from './config.js'

/** What test/redis-sentinel.ts's `startSentinelGroup()` resolves with. */
export interface SentinelGroup {
  name: string
  sentinels: HostPort[]
  killPrimary: () => Promise<void>
  waitForFailover: (timeoutMs: number) => Promise<number>
  stop: () => Promise<void>
}

export type StartSentinelGroup = (options?: { downAfterMs?: number, failoverTimeoutMs?: number }) => Promise<SentinelGroup>

const MODULE = new URL('../redis-sentinel.js', import.meta.url)

/** `startSentinelGroup` from test/redis-sentinel.ts, or undefined when that file is not built (or redis-sentinel is missing). */
export async function loadSentinel (): Promise<StartSentinelGroup | undefined> {
  if (!existsSync(fileURLToPath(MODULE))) return undefined
  const loaded = await import(MODULE.href) as { startSentinelGroup?: StartSentinelGroup }
  return loaded.startSentinelGroup
}
