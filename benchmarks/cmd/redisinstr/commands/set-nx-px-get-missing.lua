redis.call('SET', KEYS[1], '@1796616088 753908000 1 1', 'NX', 'PX', '1', 'GET')
return 1
