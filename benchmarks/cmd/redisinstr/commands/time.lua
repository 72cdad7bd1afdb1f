redis.call('TIME')
return 1
