redis.call('GET', KEYS[1])
return 1
