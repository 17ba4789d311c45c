/**
 * The pool scenario's acts: who sends what, to which server, for how long.
 * Each phase starts its own API process (server.ts) with its config, drives the
 * classes of clients against it (load.ts), and reads the server's CPU and pool
 * timeouts before and after. Durations and the hold are parameters: the demo runs the full
 * acts, the test shorter ones.
 */
import { drive, type ClientClass, type LoadRun } from './load.js'
import { startServer } from './child.js'
import { capacityPerSecond, HOLD_MS, type ServerConfig } from './config.js'

/** The classes of clients at the demo's hold (20 ms: a capacity of about 500/s); `scaled` adapts them to another. */
export const FAIR: ClientClass = { name: 'fair users', clients: 20, perClientPerSecond: 5, tier: 'default', addressBase: 1 }
export const VIP: ClientClass = { name: 'vip users', clients: 10, perClientPerSecond: 5, tier: 'vip', addressBase: 2 }
/** One address at five times the capacity. */
export const ABUSER: ClientClass = { name: 'abuser (1 address)', clients: 1, perClientPerSecond: 5 * capacityPerSecond(HOLD_MS), addressBase: 3 }
/** 1 000 anonymous addresses, each well within its edge (25/s) and tier (3/s) quota; three times the capacity together. */
export const CROWD: ClientClass = { name: 'anonymous crowd', clients: 1000, perClientPerSecond: 1.5, addressBase: 4 }
/**
 * Act 3's tail: 20 of the crowd's addresses, each at the crowd's rate, after the flood, so that the
 * anonymous tier, the first shed, still sends when the act checks that the sheds stop.
 */
export const TRICKLE: ClientClass = { ...CROWD, name: 'anonymous trickle', clients: 20 }

export interface Phase {
  label: string
  config: ServerConfig
  classes: ClientClass[]
  durationMs: number
}

export interface PhaseResult {
  phase: Phase
  run: LoadRun
  /** The server's CPU over the run, in ms, the requests it answered POOL_TIMEOUT, and its event loop's p99 delay. */
  serverCpuMs: number
  serverPoolTimeouts: number
  serverEventLoopDelayP99Ms: number
}

export interface Plan {
  baselineMs: number
  act1Ms: number
  act2Ms: number
  /** Act 3: the flood, then the tail (vip, fair and a trickle of the crowd's addresses) in which sheds must stop. */
  floodMs: number
  tailMs: number
  /**
   * How long a request holds its connection. Every class's rate scales with the capacity it gives
   * (10 connections / holdMs): a longer hold is the same scenario with fewer requests, less CPU.
   */
  holdMs: number
}

export const FULL: Plan = { baselineMs: 4000, act1Ms: 8000, act2Ms: 8000, floodMs: 8000, tailMs: 10_000, holdMs: HOLD_MS }

/** `one` at the rates for `plan.holdMs`. */
const scaled = (one: ClientClass, plan: Plan): ClientClass => ({ ...one, perClientPerSecond: one.perClientPerSecond * HOLD_MS / plan.holdMs })
const limits = (plan: Plan, protect = false): ServerConfig => ({ plugin: true, protect, holdMs: plan.holdMs })
const phase = (label: string, config: ServerConfig, classes: ClientClass[], durationMs: number, plan: Plan): Phase =>
  ({ label, config, classes: classes.map((one) => scaled(one, plan)), durationMs })

export const phases = {
  baseline: (p: Plan): Phase => phase('unloaded: fair and vip users alone', limits(p), [FAIR, VIP], p.baselineMs, p),
  abuserWithout: (p: Plan): Phase => phase('act 1a: one abusive client, no plugin', { plugin: false, protect: false, holdMs: p.holdMs }, [ABUSER, FAIR], p.act1Ms, p),
  abuserWith: (p: Plan): Phase => phase('act 1b: one abusive client, both layers', limits(p), [ABUSER, FAIR], p.act1Ms, p),
  crowdStatic: (p: Plan): Phase => phase('act 2: 1 000 clients under their limits, static limits', limits(p), [CROWD, FAIR, VIP], p.act2Ms, p),
  crowdProtected: (p: Plan): Phase => phase('act 3: the same crowd, capacity protection on', limits(p, true), [
    { ...CROWD, toMs: p.floodMs },
    { ...TRICKLE, fromMs: p.floodMs },
    FAIR,
    VIP
  ], p.floodMs + p.tailMs, p)
}

/** How long the code is warmed up before each phase. */
export const WARM_MS = 1500

/** Runs `phase` against a server of its own; `env` is the server's environment. */
export async function runPhase (phase: Phase, env: NodeJS.ProcessEnv = process.env, onWindow: (run: LoadRun) => void = () => {}): Promise<PhaseResult> {
  const server = await startServer(phase.config, env)
  try {
    // Each class at its rate for a while against the twin: JIT-compiled code, as in a service that has been running.
    await drive(server.warmOrigin, phase.classes.map(({ fromMs: _from, toMs: _to, ...one }) => one), WARM_MS)
    const before = await server.stats()
    const run = await drive(server.origin, phase.classes, phase.durationMs, 500, onWindow)
    const after = await server.stats()
    return {
      phase,
      run,
      serverCpuMs: (after.cpu.user + after.cpu.system - before.cpu.user - before.cpu.system) / 1000,
      serverPoolTimeouts: after.poolTimeouts - before.poolTimeouts,
      serverEventLoopDelayP99Ms: after.eventLoopDelayP99Ms
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
