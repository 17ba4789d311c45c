import t from 'tap'
import { SHORT_CASES } from './cases.js'
import { shortSuite } from './short.js'

// exact/local under a frozen Redis, a restart that lost the data, one replica cut off.
shortSuite(t, SHORT_CASES[0] ?? [])
