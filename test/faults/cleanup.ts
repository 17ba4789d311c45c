/**
 * Last-resort cleanup: processes the harness started are killed when it exits
 * without stopping them (an exception, process.exit, a signal turned into an exit
 * by run.ts). Replicas also exit on their own when their stdin closes.
 */
type Pid = () => number | undefined

const pids = new Set<Pid>()

process.on('exit', () => {
  for (const pid of pids) {
    try {
      const current = pid()
      if (current !== undefined) process.kill(current, 'SIGKILL')
    } catch {
      // already gone
    }
  }
})

/** Kills the process `pid` (or the one it names when this exits: a restarted server) if this process exits first; returns the function that forgets it. */
export function killAtExit (pid: number | undefined | Pid): () => void {
  const read: Pid = typeof pid === 'function' ? pid : () => pid
  pids.add(read)
  return () => { pids.delete(read) }
}
