// Starts dynalite (the npm package) for the Go tests, as its own CLI would,
// but keeps it running when a client goes away mid-request: dynalite 4.0.0
// throws the request's 'aborted' error from its handler, which ends the
// process. Tests kill their clients (hourglass serve, SIGKILL) on purpose;
// the server they talk to must outlive them, as DynamoDB does.
//
// Usage: node dynalite.js <port> <host>
'use strict'

const dynalite = require('dynalite')

const [port, host] = process.argv.slice(2)

process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('dynalite: a client went away mid-request (%s); serving on', err.message)
    return
  }
  console.error(err)
  process.exit(1)
})

const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
server.listen(Number(port), host, () => {
  console.log('Dynalite listening at: http://%s:%s', host, server.address().port)
})
