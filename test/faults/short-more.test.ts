import t from 'tap'
import { SHORT_CASES } from './cases.js'
import { shortSuite } from './short.js'

// closed under a frozen Redis, replica-share through a restart, settle with a replica stopped.
shortSuite(t, SHORT_CASES[1] ?? [])
