module gpupolicy.dev/consumers/strictkeys

go 1.18
