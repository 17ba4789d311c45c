/**
 * The stated bounds on what the edge admits in a window, one function per case,
 * as the README states them. B capacity, R refill per second, N replicas,
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

/** 'exact' (or a mode that uses Redis in the background), failMode 'local', Redis unreachable for every replica d s. */
export const unreachable = ({ B, R, t, h, d }: BoundInput): number => B + R * t + h * (B + R * d)

/** The same when Redis lost its data (restarted empty; a Sentinel failover). */
export const dataLost = (input: BoundInput): number => unreachable(input) + input.B

/** 'exact', failMode 'local', k of N replicas cut off from Redis for d s. */
export const cutOff = ({ B, R, t, h, d, k, N }: BoundInput): number => B + R * t + k * (1 + h) / N * (B + R * d)

/** failMode 'closed', whatever the fault. */
export const closed = ({ B, R, t }: BoundInput): number => B + R * t

/** 'replica-share' under Redis faults: nothing changes. */
export const replicaShare = ({ B, R, t }: BoundInput): number => B + R * t

/** 'replica-share', scaled up from N to M replicas. */
export const scaleUp = ({ B, R, t, N, M, I }: BoundInput): number => B + R * t + (M - N) * B / (N + 1) + R * I

/** 'settle': each replica's first unreserved share on top of one quota. */
export const settle = ({ B, R, t, N }: BoundInput): number => B + R * t + N * Math.max(1, B / N)

/** 'exact' with a skewed replica clock. */
export const skewed = ({ B, R, t }: BoundInput): number => B + R * t

export const BOUNDS = { noFault, unreachable, dataLost, cutOff, closed, replicaShare, scaleUp, settle, skewed } as const
export type BoundName = keyof typeof BOUNDS

export const FORMULAS: Record<BoundName, string> = {
  noFault: 'B + R·t',
  unreachable: 'B + R·t + h·(B + R·d)',
  dataLost: 'B + R·t + h·(B + R·d) + B',
  cutOff: 'B + R·t + k·(1 + h)/N·(B + R·d)',
  closed: 'B + R·t',
  replicaShare: 'B + R·t',
  scaleUp: 'B + R·t + (M − N)·B/(N + 1) + R·I',
  settle: 'B + R·t + N·max(1, B/N)',
  skewed: 'B + R·t'
}
