// Runs a script's `main`, then prints its `out` as one JSON line and exits 0; on an error,
// the stack and `out` go to stderr and the exit code is 1 (test_kafkajs.py reads both).

'use strict'

module.exports = function finish(main, out) {
  main().then(
    () => { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(0) },
    (err) => {
      process.stderr.write(`${err.stack || err}\n${JSON.stringify(out)}\n`)
      process.exit(1)
    },
  )
}
