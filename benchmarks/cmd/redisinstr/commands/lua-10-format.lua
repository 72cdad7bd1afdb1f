local a, b, c = '@j81000000/1000000000:1796616088 1796616088753908', '@j81000000/1000000000:', '1796616088753908'
local x
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
x = string.format('%d', 1796616088753908)
return 1
