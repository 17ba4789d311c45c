/**
 * The stated bounds on what the edge admits in a window, one function per case,
 * as docs/failures.md states them. B capacity, R refill per second, N replicas,
 * h = fallbackHeadroom, t the measured window (s), d the seconds Redis was
 * unreachable within it (summed over stalls), k the replicas cut off, M the
 * replicas after a scale-up, I the heartbeat interval (s). A run passes when it
 * admitted at most the bound plus `SLACK` (one token for counting edges).
 */

export interface BoundInput {
  B: number
  R: number
  N: number
  h: number
  t: number
  d: number
  k: number
  M: number
  I: number
}

/** One token for counting edges, nothing more. */
export const SLACK = 1

/** No fault, any mode. */
export const noFault = ({ B, R, t }: BoundInput): number => B + R * t

/** 'exact', failMode 'local', Redis unreachable for every replica d s (a busy host: d = 0). */
export const unreachable = ({ B, R, t, h, d }: BoundInput): number => B + R * t + h * (B + R * d)

/** The same when Redis lost its data (restarted empty; a Sentinel failover): its state is full again. */
export const dataLost = (input: BoundInput): number => unreachable(input) + input.B

/** 'exact', failMode 'local', k of N replicas cut off from Redis for d s. */
export const cutOff = ({ B, R, t, h, d, k, N }: BoundInput): number => B + R * t + k * (1 + h) / N * (B + R * d)

/** failMode 'closed': one quota, only 503 while Redis is away. */
export const closed = ({ B, R, t }: BoundInput): number => B + R * t

/** failMode 'closed' when Redis lost its data. */
export const closedDataLost = ({ B, R, t }: BoundInput): number => B + R * t + B

/** 'replica-share' under Redis faults, its data lost included: nothing changes. */
export const replicaShare = ({ B, R, t }: BoundInput): number => B + R * t

/** 'replica-share', k of N replicas cut off d s: the others stop counting them and take their shares too. */
export const replicaShareCut = ({ B, R, t, d, k, N }: BoundInput): number => B + R * t + k / N * (B + R * d)

/** 'replica-share', scaled up from N to M replicas. */
export const scaleUp = ({ B, R, t, N, M, I }: BoundInput): number => B + R * t + (M - N) * B / (N + 1) + R * I

/** 'settle': each replica's first unreserved share on top of one quota (a replica stopped or killed, a busy host, Redis away). */
export const settle = ({ B, R, t, N }: BoundInput): number => B + R * t + N * Math.max(1, B / N)

/** 'settle' when Redis lost its data. */
export const settleDataLost = (input: BoundInput): number => settle(input) + input.B

/** 'settle', k of N replicas cut off d s: each earns R/N a second on its own. */
export const settleCut = (input: BoundInput): number => settle(input) + input.k * input.R / input.N * input.d

/** 'exact' with a skewed replica clock. */
export const skewed = ({ B, R, t }: BoundInput): number => B + R * t

export const BOUNDS = { noFault, unreachable, dataLost, cutOff, closed, closedDataLost, replicaShare, replicaShareCut, scaleUp, settle, settleDataLost, settleCut, skewed } as const
export type BoundName = keyof typeof BOUNDS

export const FORMULAS: Record<BoundName, string> = {
  noFault: 'B + R·t',
  unreachable: 'B + R·t + h·(B + R·d)',
  dataLost: 'B + R·t + h·(B + R·d) + B',
  cutOff: 'B + R·t + k·(1 + h)/N·(B + R·d)',
  closed: 'B + R·t',
  closedDataLost: 'B + R·t + B',
  replicaShare: 'B + R·t',
  replicaShareCut: 'B + R·t + k/N·(B + R·d)',
  scaleUp: 'B + R·t + (M − N)·B/(N + 1) + R·I',
  settle: 'B + R·t + N·max(1, B/N)',
  settleDataLost: 'B + R·t + N·max(1, B/N) + B',
  settleCut: 'B + R·t + N·max(1, B/N) + k·R·d/N',
  skewed: 'B + R·t'
}
