/**
 * The fault cases: each fault under the edge modes and failModes it concerns,
 * with the bound it must keep. `SHORT_CASES` is what `npm test` runs; `ALL_CASES`
 * what `npm run faults` runs (three times each).
 */
import type { EdgeMode, FailMode } from '../../lib/index.js'
import type { BoundName } from './bounds.js'
import type { FaultKind } from './injectors.js'
import type { LoadShape } from './load.js'

export interface FaultCase {
  id: string
  mode: EdgeMode
  failMode: FailMode
  fault: FaultKind
  bound: BoundName
  /** The load; default `DEFAULT_LOAD`. */
  load?: LoadShape
}

/** About 80 requests a second to each replica: far above R = 20/s, so the bucket stays hot. */
export const DEFAULT_LOAD: LoadShape = { ratePerReplica: 80 }

const of = (mode: EdgeMode, failMode: FailMode, fault: FaultKind, bound: BoundName, load?: LoadShape): FaultCase =>
  ({ id: `${mode}/${failMode}/${fault}${load !== undefined && 'concurrency' in load ? `/x${load.concurrency}` : ''}`, mode, failMode, fault, bound, ...(load === undefined ? {} : { load }) })

/** Redis faults that every replica sees: stalls, and a restart that lost the data. */
const REDIS_FAULTS: FaultKind[] = ['sigstop', 'restart-empty', 'debug-sleep']
const lost = (fault: FaultKind): boolean => fault === 'restart-empty'

export const ALL_CASES: FaultCase[] = [
  of('exact', 'local', 'none', 'noFault'),
  of('exact', 'local', 'none', 'noFault', { concurrency: 200 }),
  of('replica-share', 'local', 'none', 'noFault'),
  of('settle', 'local', 'none', 'noFault'),
  ...REDIS_FAULTS.map((fault) => of('exact', 'local', fault, lost(fault) ? 'dataLost' : 'unreachable')),
  ...REDIS_FAULTS.map((fault) => of('exact', 'closed', fault, lost(fault) ? 'closedDataLost' : 'closed')),
  ...REDIS_FAULTS.map((fault) => of('replica-share', 'local', fault, 'replicaShare')),
  ...REDIS_FAULTS.map((fault) => of('settle', 'local', fault, lost(fault) ? 'settleDataLost' : 'settle')),
  of('exact', 'local', 'sentinel-failover', 'dataLost'),
  of('exact', 'local', 'proxy-cut', 'cutOff'),
  of('exact', 'closed', 'proxy-cut', 'closed'),
  of('replica-share', 'local', 'proxy-cut', 'replicaShareCut'),
  of('settle', 'local', 'proxy-cut', 'settleCut'),
  of('replica-share', 'local', 'scale-up', 'scaleUp'),
  of('settle', 'local', 'stop-replica', 'settle'),
  of('settle', 'local', 'kill-replica', 'settle'),
  of('exact', 'local', 'skew', 'skewed'),
  of('exact', 'local', 'cpu', 'unreachable'),
  of('settle', 'local', 'cpu', 'settle')
]

const find = (id: string): FaultCase => {
  const found = ALL_CASES.find((candidate) => candidate.id === id)
  if (found === undefined) throw new Error(`no fault case ${id}`)
  return found
}

/** The short suite of `npm test`, in the files that run it. */
export const SHORT_CASES: FaultCase[][] = [
  [find('exact/local/sigstop'), find('exact/local/restart-empty'), find('exact/local/proxy-cut')],
  [find('exact/closed/sigstop'), find('replica-share/local/restart-empty'), find('settle/local/stop-replica')]
]
