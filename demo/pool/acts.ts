/**
 * The pool scenario's acts: who sends what, to which server, for how long.
 * Each phase starts its own API process (server.ts) with its config, drives the
 * classes of clients against it (load.ts), and reads the server's CPU and pool
 * timeouts before and after. Durations are parameters: the demo runs the full
 * acts, the test shorter ones.
 */
import { drive, type ClientClass, type LoadRun } from './load.js'
import { startServer } from './child.js'
import type { ServerConfig } from './config.js'

/** About what the pool serves: 10 connections each held 20 ms (a little less in practice). */
export const CAPACITY_PER_SECOND = 500

export const FAIR: ClientClass = { name: 'fair users', clients: 20, perClientPerSecond: 5, tier: 'default', addressBase: 1 }
export const VIP: ClientClass = { name: 'vip users', clients: 10, perClientPerSecond: 5, tier: 'vip', addressBase: 2 }
/** One address at five times the capacity. */
export const ABUSER: ClientClass = { name: 'abuser (1 address)', clients: 1, perClientPerSecond: 5 * CAPACITY_PER_SECOND, addressBase: 3 }
/** 1 000 anonymous addresses, each well within its edge (25/s) and tier (3/s) quota; three times the capacity together. */
export const CROWD: ClientClass = { name: 'anonymous crowd', clients: 1000, perClientPerSecond: 1.5, addressBase: 4 }

export interface Phase {
  label: string
  config: ServerConfig
  classes: ClientClass[]
  durationMs: number
}

export interface PhaseResult {
  phase: Phase
  run: LoadRun
  /** The server's CPU over the run, in ms, and the requests it answered POOL_TIMEOUT. */
  serverCpuMs: number
  serverPoolTimeouts: number
}

export interface Durations {
  baselineMs: number
  act1Ms: number
  act2Ms: number
  /** Act 3: the flood, then the tail (vip, fair and a trickle of the crowd's addresses) in which sheds must stop. */
  floodMs: number
  tailMs: number
}

export const FULL: Durations = { baselineMs: 4000, act1Ms: 8000, act2Ms: 8000, floodMs: 8000, tailMs: 10_000 }

const LIMITS: ServerConfig = { plugin: true, protect: false }

export const phases = {
  baseline: (d: Durations): Phase => ({ label: 'unloaded: fair and vip users alone', config: LIMITS, classes: [FAIR, VIP], durationMs: d.baselineMs }),
  abuserWithout: (d: Durations): Phase => ({ label: 'act 1a: one abusive client, no plugin', config: { plugin: false, protect: false }, classes: [ABUSER, FAIR], durationMs: d.act1Ms }),
  abuserWith: (d: Durations): Phase => ({ label: 'act 1b: one abusive client, both layers', config: LIMITS, classes: [ABUSER, FAIR], durationMs: d.act1Ms }),
  crowdStatic: (d: Durations): Phase => ({ label: 'act 2: 1 000 clients under their limits, static limits', config: LIMITS, classes: [CROWD, FAIR, VIP], durationMs: d.act2Ms }),
  crowdProtected: (d: Durations): Phase => ({
    label: 'act 3: the same crowd, capacity protection on',
    config: { plugin: true, protect: true },
    classes: [
      { ...CROWD, toMs: d.floodMs },
      // After the flood, 20 of the crowd's addresses go on at the same rate each.
      { ...CROWD, name: 'anonymous trickle', clients: 20, fromMs: d.floodMs },
      FAIR,
      VIP
    ],
    durationMs: d.floodMs + d.tailMs
  })
}

/** Runs `phase` against a server of its own; `env` is the server's environment. */
export async function runPhase (phase: Phase, env: NodeJS.ProcessEnv = process.env, onWindow: (run: LoadRun) => void = () => {}): Promise<PhaseResult> {
  const server = await startServer(phase.config, env)
  try {
    const before = await server.stats()
    const run = await drive(server.origin, phase.classes, phase.durationMs, 500, onWindow)
    const after = await server.stats()
    return {
      phase,
      run,
      serverCpuMs: (after.cpu.user + after.cpu.system - before.cpu.user - before.cpu.system) / 1000,
      serverPoolTimeouts: after.poolTimeouts - before.poolTimeouts
    }
  } finally {
    await server.stop()
  }
}

/**
 * Act 3's recovery: from the end of the flood to the end of the last window with a shed request
 * (of any class); 0 when none was shed after the flood.
 */
export function recoveryMs (result: PhaseResult, floodMs: number): number {
  const { windowMs } = result.run
  const first = Math.floor(floodMs / windowMs)
  let last = -1
  for (const { windows } of result.run.classes) {
    windows.forEach((counts, i) => { if (i >= first && counts.shed > 0) last = Math.max(last, i) })
  }
  return last === -1 ? 0 : Math.max(0, (last + 1) * windowMs - floodMs)
}
